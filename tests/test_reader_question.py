"""The question the Hand's tuned reader reads: topic mentions written as the KG names them, sentence case, a mark."""

from __future__ import annotations

from rg.privacy.names import NameBook
from rg.reasoning.dualtower.template import reader_question


def test_a_typed_question_reads_as_the_written_one():
    assert reader_question("who has gideon lindqvist been married to", ["Gideon Lindqvist"]) == \
        "Who has Gideon Lindqvist been married to?"
    written = "Where was the spouse of Elena Lindqvist born?"
    assert reader_question(written, ["Elena Lindqvist"]) == written
    assert reader_question("  name the films of heat.  ", ["Heat"]) == "Name the films of Heat."
    assert reader_question("", ["Heat"]) == ""


def test_mentions_are_rewritten_once_by_the_name_of_their_own_topic():
    book = NameBook(names={"m.01": "Robert De Niro", "m.02": "Heat"}, aliases={"m.01": ("De Niro", "bobby")})
    # the alias inside the written name is not rewritten again, and each mention takes its own topic's name
    assert reader_question("did de niro or Bobby star in heat", ["m.01", "m.02"], book) == \
        "Did Robert De Niro or Robert De Niro star in Heat?"
    assert reader_question("did robert de niro star in heat", ["m.01", "m.02"], book) == \
        "Did Robert De Niro star in Heat?"
