"""Names of the synthetic world: Freebase relation names and the word lists for entity names.

Everything here is an immutable constant; the KG builder draws from the word lists and links
entities with the relations, and the question templates walk the same relations.
"""

INVERSE_SUFFIX = "^-1"
"""Suffix of a relation walked from tail to head (``rel^-1``)."""

# Relations (Freebase names).
NOTABLE_TYPES = "common.topic.notable_types"
CONTAINED_BY = "location.location.containedby"
CAPITAL = "location.country.capital"
POPULATION = "location.statistical_region.population"
PLACE_OF_BIRTH = "people.person.place_of_birth"
DATE_OF_BIRTH = "people.person.date_of_birth"
NATIONALITY = "people.person.nationality"
GENDER = "people.person.gender"
PROFESSION = "people.person.profession"
SPOUSE_S = "people.person.spouse_s"
MARRIAGE_SPOUSE = "people.marriage.spouse"
MARRIAGE_FROM = "people.marriage.from"
MARRIAGE_TO = "people.marriage.to"
EMPLOYMENT_HISTORY = "people.person.employment_history"
TENURE_COMPANY = "business.employment_tenure.company"
TENURE_TITLE = "business.employment_tenure.title"
TENURE_FROM = "business.employment_tenure.from"
TENURE_TO = "business.employment_tenure.to"
EDUCATION = "people.person.education"
EDUCATION_INSTITUTION = "education.education.institution"
EDUCATION_DEGREE = "education.education.degree"
EDUCATION_END = "education.education.end_date"
DIRECTED_BY = "film.film.directed_by"
WRITTEN_BY = "film.film.written_by"
PRODUCED_BY = "film.film.produced_by"
STARRING = "film.film.starring"
PERFORMANCE_ACTOR = "film.performance.actor"
RELEASE_DATE = "film.film.initial_release_date"
RUNTIME = "film.film.runtime"
BUDGET = "film.film.estimated_budget"
GENRE = "film.film.genre"
FILM_COUNTRY = "film.film.country"
FOUNDERS = "organization.organization.founders"
PLACE_FOUNDED = "organization.organization.place_founded"
DATE_FOUNDED = "organization.organization.date_founded"
EMPLOYEES = "organization.organization.number_of_employees"

# Word lists for names.
FEMALE_FIRST = (
    "Alma", "Beatrix", "Clara", "Daphne", "Elena", "Freya", "Greta", "Hanna", "Ines", "Juno",
    "Katya", "Lotte", "Mira", "Noor", "Olga", "Rosa", "Tilda", "Vera", "Xenia", "Zora",
)
MALE_FIRST = (
    "Anton", "Bruno", "Cyril", "Dario", "Emil", "Felix", "Gideon", "Hugo", "Ivo", "Jonas",
    "Kasper", "Lars", "Matteo", "Nils", "Pavel", "Quinn", "Soren", "Umar", "Wim", "Yusuf",
)
LAST_NAMES = (
    "Verhoeven", "Castellano", "Lindqvist", "Okafor", "Moreau", "Novak", "Haddad", "Brennan",
    "Takahashi", "Kowalski", "Ferreira", "Adeyemi", "Lindgren", "Rossi", "Petrov", "Nakamura",
    "Duarte", "Sorensen", "Calloway", "Whitlock", "Abernathy", "Delacroix", "Halvorsen", "Ibarra",
    "Jansen", "Kettering", "Marchetti", "Nyberg", "Oyelaran", "Quint", "Ravensworth", "Salazar",
    "Thornbury", "Underhill", "Vasquez", "Winslow", "Yamada", "Zeller", "Achterberg", "Bellamy",
)
TITLE_ADJECTIVES = (
    "Silent", "Crimson", "Hollow", "Last", "Burning", "Distant", "Golden", "Broken", "Hidden",
    "Northern", "Quiet", "Restless", "Shattered", "Wandering", "Frozen", "Endless", "Velvet",
    "Iron", "Pale", "Secret", "Lonely", "Electric", "Forgotten", "Midnight", "Scarlet", "Sunken",
)
TITLE_NOUNS = (
    "Harbour", "Orchard", "Garden", "River", "Empire", "Lantern", "Mirror", "Horizon", "Kingdom",
    "Meadow", "Station", "Tide", "Compass", "Signal", "Winter", "Summer", "Crown", "Shadow",
    "Voyage", "Bridge", "Archive", "Engine", "Island", "Promise", "Frontier", "Carnival",
)
TITLE_OF_NOUNS = (
    "Ashes", "Glass", "Thunder", "Salt", "Smoke", "Dust", "Silver", "Rain", "Stars", "Bones",
    "Echoes", "Embers", "Honey", "Wolves", "Tomorrow",
)
CITY_PREFIXES = (
    "Ash", "Bel", "Cor", "Dun", "Eld", "Fen", "Glen", "Hal", "Iver", "Kel", "Lor", "Mar", "Nor",
    "Oak", "Pel", "Quar", "Ros", "Sel", "Tor", "Ul", "Var", "Wes", "Yar", "Zan", "Brim", "Cal",
)
CITY_SUFFIXES = (
    "ford", "haven", "bury", "wick", "mouth", "stead", "field", "more", "port", "vale", "gate",
    "holm", "ridge", "ton", "dale",
)
COUNTRY_PREFIXES = (
    "Val", "Nor", "Ost", "Kar", "Bel", "Thal", "Ard", "Mir", "Sund", "Vel", "Cas", "Eri", "Lum",
    "Zar", "Dor", "Tav",
)
COUNTRY_SUFFIXES = ("oria", "land", "avia", "istan", "enia", "mark")
CONTINENTS = ("Aurelia", "Boreas", "Meridia", "Occidia", "Orientis", "Australis")
COMPANY_STEMS = (
    "North", "Blue", "Silver", "Red", "Bright", "Stone", "Clear", "High", "Star", "Green",
    "Swift", "Deep", "True", "Cedar", "Iron",
)
COMPANY_TAILS = ("wind", "fern", "field", "bridge", "light", "water", "crest", "peak", "vale")
COMPANY_KINDS = (
    "Pictures", "Systems", "Holdings", "Labs", "Media", "Industries", "Studios", "Logistics",
    "Foods", "Energy",
)
UNIVERSITY_PATTERNS = (
    "University of {city}", "{city} Institute of Technology", "{city} State University",
    "{last} College",
)
GENRES = (
    "Drama", "Comedy", "Thriller", "Science Fiction", "Documentary", "Romance", "Horror",
    "Western", "Animation", "Musical", "Crime Fiction", "Adventure",
)
FILM_PROFESSIONS = ("Film Director", "Screenwriter", "Film Producer", "Actor")
OTHER_PROFESSIONS = (
    "Engineer", "Physician", "Lawyer", "Teacher", "Journalist", "Architect", "Economist",
    "Musician",
)
JOB_TITLES = (
    "Chief Executive Officer", "Chief Technology Officer", "Software Engineer", "Accountant",
    "Product Manager", "Research Scientist", "Sales Director", "Designer",
)
DEGREES = (
    "Bachelor of Arts", "Bachelor of Science", "Master of Science", "Master of Fine Arts",
    "Doctor of Philosophy", "Juris Doctor",
)
GENDERS = ("Female", "Male")

# Entity kind → name of its notable-type node.
NOTABLE_TYPE_NAMES = (
    ("person", "Person"), ("film", "Film"), ("city", "City/Town"), ("country", "Country"),
    ("continent", "Continent"), ("company", "Organization"), ("university", "College/University"),
    ("genre", "Film genre"), ("profession", "Profession"), ("job_title", "Job title"),
    ("degree", "Educational Degree"), ("gender", "Gender"),
)
