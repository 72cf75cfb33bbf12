"""DLRMConfig: presets have the stated sizes, overrides apply, invalid configs fail with clear errors."""

from __future__ import annotations

import dataclasses

import pytest

from lecture_code.model import DLRMConfig

TABLES = (7, 3, 11)


def test_kaggle_preset_mirrors_dlrm_kaggle_benchmark():
    config = DLRMConfig.preset("kaggle", TABLES)
    assert config.embedding_dim == 16
    assert (config.num_dense, *config.dense_arch_layer_sizes) == (13, 512, 256, 64, 16)
    assert config.over_arch_layer_sizes == (512, 256, 1)
    assert (config.interaction, config.hashing) == ("dot", "vocabulary")


def test_small_preset_sizes():
    config = DLRMConfig.preset("small", TABLES)
    assert config.embedding_dim == 16
    assert (config.num_dense, *config.dense_arch_layer_sizes) == (13, 64, 32, 16)
    assert config.over_arch_layer_sizes == (128, 64, 1)


def test_preset_overrides_and_lists_become_tuples():
    config = DLRMConfig.preset(
        "small",
        [5, 6],
        embedding_dim=8,
        dense_arch_layer_sizes=[32, 8],
        interaction="outer",
        hashing="modulus",
    )
    assert config.num_embeddings_per_feature == (5, 6)
    assert config.dense_arch_layer_sizes == (32, 8)
    assert (config.embedding_dim, config.interaction, config.hashing, config.num_sparse) == (
        8,
        "outer",
        "modulus",
        2,
    )
    hash(config)  # frozen and made of tuples: usable as a cache key
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.embedding_dim = 4


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"dense_arch_layer_sizes": (64, 32)}, "must end at embedding_dim"),
        ({"embedding_dim": 8}, "must end at embedding_dim"),
        ({"over_arch_layer_sizes": (64, 2)}, "must end in 1"),
        ({"over_arch_layer_sizes": ()}, "non-empty"),
        ({"dense_arch_layer_sizes": (0, 16)}, "positive"),
        ({"interaction": "cross"}, "interaction must be one of"),
        ({"hashing": "md5"}, "hashing must be one of"),
        ({"num_dense": 0}, "num_dense"),
    ],
)
def test_invalid_config_raises_clear_error(overrides, message):
    with pytest.raises(ValueError, match=message):
        DLRMConfig.preset("small", TABLES, **overrides)


def test_invalid_tables_raise():
    with pytest.raises(ValueError, match="at least one sparse feature"):
        DLRMConfig(num_embeddings_per_feature=())
    with pytest.raises(ValueError, match="at least 1 row"):
        DLRMConfig(num_embeddings_per_feature=(4, 0))


def test_unknown_preset_and_unknown_field():
    with pytest.raises(ValueError, match="unknown preset"):
        DLRMConfig.preset("huge", TABLES)
    with pytest.raises(TypeError, match="unknown DLRMConfig field"):
        DLRMConfig.preset("small", TABLES, embeding_dim=16)
