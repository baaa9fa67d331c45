"""Read MetaQA: the WikiMovies KB, the 1/2/3-hop question files and the canonical split.

MetaQA (Zhang et al., "Variational Reasoning for Question Answering with Knowledge Graph",
AAAI 2018) is built on the WikiMovies KB (Miller et al., 2016). Its files are:

- the KB, one ``head|relation|tail`` triple per line over 9 relations (``METAQA_RELATIONS``);
- question files, one ``question with [topic entity]<TAB>answer1|answer2|...`` per line;
- rg's canonical split, ``{"splits": {"1hop": {"train": [line indices], ...}, ...}}``.

Files may be plain or gzip-compressed. Line indices are 0-based everywhere: question ids embed
them and the split lists them, so ``split[1]["test"]`` selects the ids
``metaqa-1hop-{name}-{i}``. Unreadable lines are reported as ``BadRow`` records with a reason,
never dropped silently.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

from rg.data.records import BadRow, BadRowError, iter_text_lines, read_json_file
from rg.data.sample import Question, Triple

METAQA_RELATIONS = frozenset(
    {
        "directed_by",
        "has_genre",
        "has_imdb_rating",
        "has_imdb_votes",
        "has_tags",
        "in_language",
        "release_year",
        "starred_actors",
        "written_by",
    }
)
"""The 9 relations of the MetaQA / WikiMovies KB."""

MetaQASplit = dict[int, dict[str, tuple[int, ...]]]
"""Canonical MetaQA split: hop count → split name (train/val/test) → 0-based line indices."""

_TOPIC = re.compile(r"\[([^\[\]]+)\]")


def read_metaqa_kb(
    path: str | Path, relations: frozenset[str] = METAQA_RELATIONS
) -> Iterator[Triple]:
    """Yield the ``(head, relation, tail)`` triples of a MetaQA KB file, strictly.

    Args:
        path: A ``head|relation|tail`` file such as ``metaqa/kb_reconstructed.txt.gz``.
        relations: The known relation names, used to split lines with more than two ``|``.

    Raises:
        BadRowError: at the first line that is not a triple (see ``read_metaqa_kb_rows`` to
            collect such lines instead).
    """
    for _, item in read_metaqa_kb_rows(path, relations):
        if isinstance(item, BadRow):
            raise BadRowError(item)
        yield item


def read_metaqa_kb_rows(
    path: str | Path, relations: frozenset[str] = METAQA_RELATIONS
) -> Iterator[tuple[int, Triple | BadRow]]:
    """Yield ``(line_index, Triple | BadRow)`` for each line of a MetaQA KB file.

    A line with exactly three ``|``-separated parts is taken as it is. Entity names could contain
    ``|`` (none do in ``kb_reconstructed.txt.gz``), so a line with more parts is split around the
    one inner part that is a known relation: everything before it is the head and everything
    after it the tail, each re-joined with ``|``. If no inner part, or more than one, is a known
    relation the line is a ``BadRow`` (``wrong_field_count`` or ``ambiguous_relation``) rather
    than a guess. Blank lines and lines with an empty head, relation or tail are BadRows too.

    Args:
        path: As for ``read_metaqa_kb``.
        relations: As for ``read_metaqa_kb``.
    """
    source = str(path)
    for index, text in iter_text_lines(path):
        if isinstance(text, BadRow):
            yield index, text
        else:
            yield index, _parse_kb_line(text, relations, source, index)


def _parse_kb_line(
    text: str, relations: frozenset[str], source: str, index: int
) -> Triple | BadRow:
    if not text.strip():
        return BadRow(source, index, "blank_line", "empty line in a KB file")
    parts = text.split("|")
    if len(parts) < 3:
        return BadRow(source, index, "wrong_field_count", f"{text!r} is not head|relation|tail")
    if len(parts) == 3:
        head, relation, tail = parts
    else:
        cuts = [i for i in range(1, len(parts) - 1) if parts[i] in relations]
        if len(cuts) != 1:
            reason = "ambiguous_relation" if cuts else "wrong_field_count"
            return BadRow(
                source,
                index,
                reason,
                f"{text!r} has {len(parts)} '|'-separated parts and {len(cuts)} known relations",
            )
        cut = cuts[0]
        head, relation, tail = "|".join(parts[:cut]), parts[cut], "|".join(parts[cut + 1 :])
    if not (head and relation and tail):
        return BadRow(source, index, "empty_field", f"{text!r} has an empty part")
    return head, relation, tail


def read_metaqa_questions(
    path: str | Path, hops: int, split_name: str
) -> Iterator[Question | BadRow]:
    """Yield a Question (or a BadRow) for each line of a MetaQA question file.

    The topic entity is the text inside ``[...]`` (a line with several bracketed spans gives
    several topic entities, in order). The question text keeps the entity's words and drops only
    the brackets, e.g. ``what does [Helen Mack] star in`` → ``what does Helen Mack star in``, so
    it reads as natural language and still names the entity. Answers are the ``|``-separated
    names after the tab, in file order.

    Args:
        path: A ``question<TAB>answers`` file such as ``metaqa/qa_test_1hop.txt.gz``.
        hops: The file's hop count (1, 2 or 3); stored in each Question and in its id.
        split_name: The name that goes into ids (e.g. ``"test"`` for ``qa_test_*``).

    Yields:
        ``Question`` with id ``metaqa-{hops}hop-{split_name}-{line_index}`` (0-based line
        index), or ``BadRow`` with reason ``no_tab``, ``wrong_field_count``, ``no_topic``,
        ``empty_answers``, ``blank_line`` or ``bad_encoding``.

    Raises:
        ValueError: if ``hops`` is not a positive integer or ``split_name`` is empty.
    """
    if isinstance(hops, bool) or not isinstance(hops, int) or hops < 1:
        raise ValueError(f"hops must be a positive integer, got {hops!r}")
    if not split_name or any(c.isspace() for c in split_name):
        raise ValueError(f"split_name must be a non-empty word, got {split_name!r}")
    source = str(path)
    for index, text in iter_text_lines(path):
        if isinstance(text, BadRow):
            yield text
        else:
            question_id = f"metaqa-{hops}hop-{split_name}-{index}"
            yield _parse_question_line(text, question_id, hops, source, index)


def _parse_question_line(
    text: str, question_id: str, hops: int, source: str, index: int
) -> Question | BadRow:
    if not text.strip():
        return BadRow(source, index, "blank_line", "empty line in a question file")
    fields = text.split("\t")
    if len(fields) == 1:
        return BadRow(source, index, "no_tab", f"{text!r} has no tab between question and answers")
    if len(fields) > 2:
        return BadRow(source, index, "wrong_field_count", f"{text!r} has {len(fields) - 1} tabs")
    question, answer_field = fields
    topics = tuple(_TOPIC.findall(question))
    if not topics:
        return BadRow(source, index, "no_topic", f"{question!r} has no [topic entity]")
    answers = tuple(answer_field.split("|"))
    if not all(a.strip() for a in answers):
        return BadRow(source, index, "empty_answers", f"empty answer in {answer_field!r}")
    return Question(
        id=question_id,
        question=_TOPIC.sub(r"\1", question).strip(),
        answers=answers,
        q_entities=topics,
        hops=hops,
    )


def read_metaqa_split(path: str | Path) -> MetaQASplit:
    """Return the canonical MetaQA split: hop count → split name → 0-based line indices.

    Args:
        path: ``splits/metaqa_split.json.gz``, of the form
            ``{"unit": "0-based line index", "splits": {"1hop": {"train": [...], ...}, ...}}``.

    Raises:
        ValueError: if the file is not of that form or a line index is in two splits of a hop.
    """
    data = read_json_file(path)
    if not isinstance(data, dict) or not isinstance(data.get("splits"), dict):
        raise ValueError(f"{path}: expected a JSON object with a 'splits' object")
    unit = data.get("unit", "0-based line index")
    if unit != "0-based line index":
        raise ValueError(f"{path}: split unit is {unit!r}, expected '0-based line index'")
    result: MetaQASplit = {}
    for hop_key, splits in data["splits"].items():
        match = re.fullmatch(r"([1-9][0-9]*)hop", hop_key)
        if match is None or not isinstance(splits, dict):
            raise ValueError(f"{path}: expected split keys like '1hop', got {hop_key!r}")
        result[int(match.group(1))] = _split_indices(splits, f"{path} [{hop_key}]")
    return result


def _split_indices(splits: dict, where: str) -> dict[str, tuple[int, ...]]:
    result: dict[str, tuple[int, ...]] = {}
    seen: dict[int, str] = {}
    for name, indices in splits.items():
        if not isinstance(indices, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in indices
        ):
            raise ValueError(f"{where}: split {name!r} must be a list of non-negative integers")
        for i in indices:
            if i in seen:
                raise ValueError(f"{where}: line index {i} is in both {seen[i]!r} and {name!r}")
            seen[i] = name
        result[name] = tuple(indices)
    return result
