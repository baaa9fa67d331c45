"""The planner's tokenizer and path vocabulary, built offline.

For a tiny model the tokenizer is trained here with the ``tokenizers`` library on the prompt
texts (word-level or BPE); for a pretrained checkpoint its own tokenizer is loaded from disk.
Either way every relation label and its inverse (``rel^-1``) is added as one special token, as
are the path markers, so a path is a short sequence of whole tokens and a trie over relation
paths is a trie over token ids. :class:`PathVocab` maps labels to ids and parses decoded ids
back into relation paths.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from rg.graph.path import INVERSE_SUFFIX
from rg.retrievers.planner.config import TokenizerConfig
from rg.retrievers.planner.prompt import PATH_END, PATH_MARKERS, PATH_SEP, PATH_START, relation_token

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
_RELATION_TOKEN = re.compile(r"^<r:(?P<label>.+)>$")


def relation_labels(relations: Iterable[str]) -> tuple[str, ...]:
    """Every stored relation and its inverse, sorted: ``(r, r^-1, s, s^-1, ...)``."""
    stored = sorted({r[: -len(INVERSE_SUFFIX)] if r.endswith(INVERSE_SUFFIX) else r for r in relations})
    return tuple(label for r in stored for label in (r, r + INVERSE_SUFFIX))


def _added_tokens(relations: Iterable[str]) -> list[str]:
    return [*PATH_MARKERS, *(relation_token(label) for label in relation_labels(relations))]


def train_tokenizer(texts: Iterable[str], relations: Iterable[str], config: TokenizerConfig):
    """Train a word-level or BPE tokenizer on ``texts`` and add the path tokens.

    Args:
        texts: Prompt texts (rendered questions) to learn the vocabulary from.
        relations: Stored relation names; each and its inverse become one token.
        config: Kind ``word`` or ``bpe``, vocabulary size, minimum frequency, lowercasing.

    Returns:
        A ``transformers.PreTrainedTokenizerFast`` with ``<pad>``, ``<unk>``, ``<s>``, ``</s>``.

    Raises:
        ValueError: for kind ``checkpoint`` (load that one with :func:`checkpoint_tokenizer`).
    """
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = [PAD, UNK, BOS, EOS]
    if config.kind == "word":
        tokenizer = Tokenizer(models.WordLevel(unk_token=UNK))
        trainer = trainers.WordLevelTrainer(
            vocab_size=config.vocab_size, min_frequency=config.min_frequency, special_tokens=specials
        )
    elif config.kind == "bpe":
        tokenizer = Tokenizer(models.BPE(unk_token=UNK))
        trainer = trainers.BpeTrainer(
            vocab_size=config.vocab_size, min_frequency=config.min_frequency, special_tokens=specials
        )
    else:
        raise ValueError(f"tokenizer.kind {config.kind!r} is not trained; use 'word' or 'bpe'")
    steps = [normalizers.NFKC()] + ([normalizers.Lowercase()] if config.lowercase else [])
    tokenizer.normalizer = normalizers.Sequence(steps)
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.add_special_tokens(_added_tokens(relations))
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token=PAD, unk_token=UNK, bos_token=BOS, eos_token=EOS)


def checkpoint_tokenizer(folder: str, relations: Iterable[str]):
    """The tokenizer saved in a model folder, with the path tokens added (and ``<pad>`` if it has none).

    The caller must resize the model's embeddings to ``len(tokenizer)``.
    """
    from tokenizers import AddedToken
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    tokens = _added_tokens(relations)
    if tokenizer.pad_token is None:
        tokens.append(PAD)
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in tokens], special_tokens=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = PAD
    return tokenizer


@dataclass(frozen=True)
class PathVocab:
    """Token ids of the path grammar and of every relation label.

    Attributes:
        start, sep, end: Ids of ``<PATH>``, ``<SEP>`` and ``</PATH>``.
        pad: Id of the padding token.
        bos: Id of the begin-of-sequence token, None if the tokenizer has none.
        label_to_id: Relation-path label (``r`` or ``r^-1``) → token id.
        id_to_label: The inverse map.
    """

    start: int
    sep: int
    end: int
    pad: int
    bos: int | None
    label_to_id: Mapping[str, int]
    id_to_label: Mapping[int, str]

    @classmethod
    def from_tokenizer(cls, tokenizer) -> "PathVocab":
        """Read the ids from a tokenizer built by :func:`train_tokenizer` / :func:`checkpoint_tokenizer`.

        Raises:
            ValueError: if a path marker or the pad token is missing.
        """
        vocab = tokenizer.get_vocab()
        missing = [t for t in PATH_MARKERS if t not in vocab]
        if missing or tokenizer.pad_token_id is None:
            raise ValueError(f"tokenizer lacks the planner tokens {missing or ['<pad>']}; build it with train_tokenizer")
        labels = {}
        for token, index in vocab.items():
            match = _RELATION_TOKEN.match(token)
            if match:
                labels[match.group("label")] = int(index)
        return cls(
            start=int(vocab[PATH_START]),
            sep=int(vocab[PATH_SEP]),
            end=int(vocab[PATH_END]),
            pad=int(tokenizer.pad_token_id),
            bos=None if tokenizer.bos_token_id is None else int(tokenizer.bos_token_id),
            label_to_id=labels,
            id_to_label={i: label for label, i in labels.items()},
        )

    def has(self, label: str) -> bool:
        """Whether the relation-path label has a token."""
        return label in self.label_to_id

    def encode(self, relation_path: Sequence[str]) -> list[int]:
        """``r1 <SEP> r2 ... </PATH>`` as ids (the ``<PATH>`` that precedes them is the prompt's).

        Raises:
            KeyError: naming a label without a token.
            ValueError: for an empty path.
        """
        if not relation_path:
            raise ValueError("a relation path needs at least one relation")
        ids: list[int] = []
        for i, label in enumerate(relation_path):
            if label not in self.label_to_id:
                raise KeyError(f"relation {label!r} has no planner token; build the tokenizer from data that has it")
            if i:
                ids.append(self.sep)
            ids.append(self.label_to_id[label])
        ids.append(self.end)
        return ids

    def parse(self, ids: Sequence[int]) -> tuple[str, ...] | None:
        """The relation path written by ``ids`` (tokens after ``<PATH>``), or None if malformed.

        Well formed means ``r (<SEP> r)* </PATH>`` followed only by padding.
        """
        labels: list[str] = []
        expect_relation = True
        for position, token in enumerate(ids):
            if expect_relation:
                if token not in self.id_to_label:
                    return None
                labels.append(self.id_to_label[token])
                expect_relation = False
            elif token == self.sep:
                expect_relation = True
            elif token == self.end:
                rest = ids[position + 1 :]
                return tuple(labels) if all(t == self.pad for t in rest) else None
            else:
                return None
        return None
