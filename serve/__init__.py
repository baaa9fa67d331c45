"""Ray Serve applications of rg (deployments and typed app builders); run from the project folder."""
