"""Criteo data: raw reader, preprocessing to parquet, synthetic default data, tensors and batches.

raw TSV (Kaggle train.txt, 1TB day_N, or synthetic)        schema.py, synthetic.py
  or the competition's CSV with a header (train.csv)       layout.py: decided from the first line
  -> CriteoReader: typed chunks, malformed rows reported    reader.py, csv_chunks.py, hexids.py, malformed.py
  -> preprocess: data.parquet + vocabulary.npz + metadata   preprocess.py, vocabulary.py, metadata.py
     written into a staging folder, renamed when complete  staging.py
     refused whole (RawFileError, nothing written): an unknown header, an empty file, no valid row,
     more malformed lines than max_malformed (default 1%)
  -> load_tensors / iter_batches: torch tensors, batches     dataset.py
  -> load_shard: one rank's rows of the split (torchrun)    shards.py
ensure_default_data(): all of the above for the synthetic default, once   default_data.py
"""

import warnings

from .dataset import (
    Batch,
    CriteoTensors,
    epoch_permutation,
    iter_batches,
    iter_parquet_batches,
    load_tensors,
    num_batches,
    split_indices,
    train_holdout_split,
)
from .default_data import ensure_default_data
from .layout import RawLayout, detect_layout
from .malformed import DEFAULT_MAX_MALFORMED, MalformedReport, MalformedRow, MalformedRowError, RawFileError
from .metadata import CriteoMetadata, DenseFeatureStats, SparseFeatureStats, load_metadata, save_metadata
from .preprocess import preprocess, transform_dense
from .reader import CriteoChunk, CriteoReader, iter_criteo_chunks
from .schema import (
    DENSE_COLUMNS,
    KAGGLE_CARDINALITIES,
    LABEL,
    MISSING_ID,
    NUM_DENSE,
    NUM_SPARSE,
    SPARSE_COLUMNS,
    TERABYTE_CARDINALITIES,
    criteo_table_rows,
)
from .shards import Shard, load_shard, read_row_range, shard_slice
from .staging import remove_stale_staging
from .synthetic import generate_criteo_tsv, scramble_ids, unscramble_ids
from .vocabulary import VocabularyCounter, build_vocabulary, vocabulary_rows

__all__ = [
    "DEFAULT_MAX_MALFORMED",
    "DENSE_COLUMNS",
    "KAGGLE_CARDINALITIES",
    "LABEL",
    "MISSING_ID",
    "NUM_DENSE",
    "NUM_SPARSE",
    "SPARSE_COLUMNS",
    "TERABYTE_CARDINALITIES",
    "criteo_table_rows",
    "Batch",
    "CriteoChunk",
    "CriteoMetadata",
    "CriteoReader",
    "CriteoTensors",
    "DenseFeatureStats",
    "MalformedReport",
    "MalformedRow",
    "MalformedRowError",
    "RawFileError",
    "RawLayout",
    "Shard",
    "SparseFeatureStats",
    "VocabularyCounter",
    "build_vocabulary",
    "detect_layout",
    "ensure_default_data",
    "epoch_permutation",
    "generate_criteo_tsv",
    "iter_batches",
    "iter_criteo_chunks",
    "iter_parquet_batches",
    "load_metadata",
    "load_shard",
    "load_tensors",
    "num_batches",
    "preprocess",
    "read_row_range",
    "remove_stale_staging",
    "save_metadata",
    "scramble_ids",
    "shard_slice",
    "split_indices",
    "train_holdout_split",
    "transform_dense",
    "unscramble_ids",
    "vocabulary_rows",
]

# `python -m lecture_code.data.preprocess` (or .synthetic) runs a module that this package has already
# imported above, to export its functions; runpy warns about that, harmlessly here.
warnings.filterwarnings("ignore", r"'lecture_code\.data\.\w+' found in sys\.modules", RuntimeWarning)
