"""``python -m jobs.load_kg`` end to end into the session's Virtuoso, and the server command line."""

from __future__ import annotations

import json

from jobs.load_kg import main
from rg.cli import run_job
from rg.config import load_config
from rg.jobs.load_kg import IDS_FILE, NT_FILE, REPORT_FILE, LoadKGConfig
from rg.stores.virtuoso import main as virtuoso_main

CONFIG = "configs/load_kg_synthetic.yaml"


def overrides(virtuoso, out) -> list[str]:
    return ["--set", f"output_dir={out}", "--set", f"virtuoso.data_dir={virtuoso.data_dir}",
            "--set", f"virtuoso.http_port={virtuoso.http_port}", "--set", f"virtuoso.isql_port={virtuoso.isql_port}",
            "--set", "synthetic.questions=10", "--set", "graph=http://rg.test/load-job"]


def test_load_kg_job_loads_the_synthetic_kg(virtuoso, tmp_path, capsys):
    assert main(["--config", CONFIG, *overrides(virtuoso, tmp_path)]) == 0
    report = json.loads((tmp_path / REPORT_FILE).read_text())
    lines = sum(1 for _ in open(tmp_path / NT_FILE))
    ids = (tmp_path / IDS_FILE).read_text().splitlines()
    assert report["triples_in_store"] == report["lines_written"] == lines == report["edges"] + report["entities"]
    assert len(ids) == report["entities"] and ids[0].startswith("m.00\t")
    assert report["pid"] == virtuoso.pid()  # loaded into the running server, no second one started
    assert virtuoso.count("http://rg.test/load-job") == lines
    assert 'kg: {"kind": "sparql"' in capsys.readouterr().out
    # the schema over the store's ids: the same types and clusters as the in-memory KG's, keyed by m.0<hex>
    from rg.data.synthetic import SyntheticConfig, generate
    from rg.privacy import KGSchema

    data = generate(SyntheticConfig(seed=0, questions=10))
    by_id = {json.loads(name): eid for eid, name in (line.split("\t", 1) for line in ids)}
    schema, memory = KGSchema.load(tmp_path), KGSchema.build(data.triples, data.entity_types)
    assert schema.clusters == memory.clusters
    assert schema.types == {by_id[e]: kind for e, kind in memory.types.items()}
    assert schema.names[by_id["Film"]] == "Film" and schema.is_public(by_id["Film"])


def test_load_kg_without_a_server_and_start_false_says_how_to_fix(tmp_path, capsys):
    code = run_job("jobs.load_kg", main, ["--config", CONFIG, "--set", f"output_dir={tmp_path}/out", "--set", f"virtuoso.data_dir={tmp_path}/db",
                 "--set", "virtuoso.start=false", "--set", "synthetic.questions=10"])
    assert code == 2
    assert "jobs.load_kg: no Virtuoso runs from" in capsys.readouterr().err


def test_one_kg_source_is_required():
    import pytest

    from rg.config import ConfigError

    with pytest.raises(ConfigError, match="exactly one of `synthetic`, `kb`, `rog`"):
        load_config(CONFIG, LoadKGConfig, ["kb.path=x.txt", "kb.format=metaqa"])


def test_virtuoso_command_line_status(virtuoso, tmp_path, capsys):
    assert virtuoso_main(["status", "--data-dir", str(virtuoso.data_dir)]) == 0
    assert f"running: pid {virtuoso.pid()}" in capsys.readouterr().out
    assert virtuoso_main(["status", "--data-dir", str(tmp_path)]) == 2
    assert "Fix: run `python -m rg.stores.virtuoso start" in capsys.readouterr().err


def test_load_kg_loads_the_union_of_rog_subgraphs(virtuoso, tmp_path):
    from rg.data.rog import write_rog_parquet
    from rg.data.sample import Sample
    from rg.jobs.load_kg import load_kg

    shared = ("m.0a", "people.person.nationality", "France")
    samples = [Sample("q1", "?", ("France",), ("m.0a",), ("France",), (shared, ("m.0a", "type.object.name", "Ann"))),
               Sample("q2", "?", ("Paris",), ("France",), ("Paris",), (shared, ("France", "location.capital", "Paris")))]
    write_rog_parquet(samples, tmp_path / "rog" / "shard-00000.parquet")
    args = [f"output_dir={tmp_path / 'out'}", f"virtuoso.data_dir={virtuoso.data_dir}",
            f"virtuoso.http_port={virtuoso.http_port}", f"virtuoso.isql_port={virtuoso.isql_port}",
            "graph=http://rg.test/rog", "synthetic=null", f"rog=[{tmp_path / 'rog'}]"]
    report = load_kg(load_config(CONFIG, LoadKGConfig, args))
    # 3 distinct edges (the shared one once), 4 entities; RoG's own name edge is left out, not read as a name
    assert (report["edges"], report["entities"], report["name_edges_left_out"]) == (3, 4, 1)
    assert report["triples_in_store"] == report["lines_written"] == 2 + 4
