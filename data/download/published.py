"""Published MD5s of the MLCommons BERT inputs: facts copied from public sources, each table
with the place it was read (docs/data_download.md tells the story).

A downloaded file is accepted only if its MD5 equals the value here; a server whose own list
(`NAME.md5`) disagrees with a value here is refused before anything is fetched, since then the
files on it are not the ones these values describe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

METADATA_ROOT = "https://training.mlcommons-storage.org/metadata/"
INPUT_FILES = "bert-input-files"
TEXT_DATASET = "bert-preprocessed-wikipedia-dataset"
DEFAULT_METADATA = (f"{METADATA_ROOT}{INPUT_FILES}.uri", f"{METADATA_ROOT}{TEXT_DATASET}.uri")

R2_INFRA = "github.com/mlcommons/r2-infra training/metadata/{}.md5 at commit {}"


@dataclass(frozen=True)
class Dataset:
    """One MLC R2 dataset: the MD5 of every file (path inside the dataset -> MD5), the files
    this project needs (fetched unless --all), and where the values were read."""

    md5: Mapping[str, str]
    needed: tuple[str, ...]
    source: str


# The TF1 checkpoint's data file is stored in the bucket as `model.ckpt-28252-003.data-...`;
# its MD5 is the one NVIDIA's README gives for `model.ckpt-28252.data-00000-of-00001` (tf1),
# the name TensorFlow reads next to `model.ckpt-28252.index` (unpack.py links it).
TF1_DATA_STORED = "tf1_ckpt/model.ckpt-28252-003.data-00000-of-00001"
TF1_DATA_NAME = "tf1_ckpt/model.ckpt-28252.data-00000-of-00001"
TF1_PREFIX = "tf1_ckpt/model.ckpt-28252"

TEXT_ARCHIVE = "results_text.tar.gz"
TEXT_LIST = "bert_reference_results_text_md5.txt"  # MD5 of every file in results4/
TEXT_DIR = "results4"  # what the archive unpacks to: part-00000-of-00500 ... eval.txt, eval.md5

WIKI_DUMP = "enwiki-20200101-pages-articles-multistream.xml.bz2"  # the raw Wikipedia dump

DATASETS: dict[str, Dataset] = {
    INPUT_FILES: Dataset(
        md5={
            f"{WIKI_DUMP}.md5sum": "004867db820d335c26d47fe90bc96a26",
            WIKI_DUMP: "00d47075e0f583fb7c0791fac1c57cb3",
            "License.txt": "4550b87b0ea99302e44c84f6bed9aa97",
            TF1_DATA_STORED: "50797acd537880bfb5a7ade80d976129",
            "tf1_ckpt/License.txt": "508515b9c73b0fff5da4484b1287ab97",
            "tf2_ckpt/License.txt": "508515b9c73b0fff5da4484b1287ab97",
            "vocab.txt": "64800d5d8528ce344256daf115d4965e",
            "tf2_ckpt/model.ckpt-28252.data-00000-of-00001": "77d642b721cf590c740c762c7f476e04",
            "bert_config.json": "7f59165e21b7d566db610ff6756c926b",
            "tf1_ckpt/model.ckpt-28252.meta": "dbd16c731e8a8113bc08eeed0326b8e7",
            "tf1_ckpt/model.ckpt-28252.index": "f97de3ae180eb8d479555c939d50d048",
            "tf2_ckpt/model.ckpt-28252.index": "fc34dd7a54afc07f2d8e9d64471dc672",
        },
        needed=(
            "License.txt",
            "vocab.txt",
            "bert_config.json",
            "tf1_ckpt/License.txt",
            "tf1_ckpt/model.ckpt-28252.index",
            TF1_DATA_STORED,
        ),
        source=R2_INFRA.format(INPUT_FILES, "5fff7e865c492ec16d73ba050676e8174ee230ab"),
    ),
    TEXT_DATASET: Dataset(
        md5={
            "License.txt": "07d7b32b485d563d2c052ef7e0b93819",
            TEXT_ARCHIVE: "6f71334b0458c6c85142f5b20962fcc6",
            TEXT_LIST: "7d3a0619cb8bf7e829af99fa5c29daa8",
            "results_text.zip": "ed72bada4134bfa2e91036746e45e551",
        },
        needed=("License.txt", TEXT_LIST, TEXT_ARCHIVE),
        source=R2_INFRA.format(TEXT_DATASET, "6e66a5efc70cbb4ad564ed5d21250dad79ee371a"),
    ),
}

# The table "Files in ./results directory" of the retired BERT reference README
# (github.com/mlcommons/training retired_benchmarks/bert/README.md at commit 95f90e8): the
# README prints only these 8 of the 502 files; the other 494 are checked against
# bert_reference_results_text_md5.txt, whose own MD5 is pinned above.
TEXT_FILES_SOURCE = "mlcommons/training retired_benchmarks/bert/README.md (commit 95f90e8)"
TEXT_FILES_MD5: dict[str, str] = {
    "eval.md5": "71a58382a68947e93e88aa0d42431b6c",
    "eval.txt": "2a220f790517261547b1b45ed3ada07a",
    "part-00000-of-00500": "a64a7c31eff5cd38ae6d94f7a6229dab",
    "part-00001-of-00500": "549a9ed4f805257245bec936563abfd0",
    "part-00002-of-00500": "1a1366ddfc03aef9d41ce552ee247abf",
    "part-00497-of-00500": "66835aa75d4855f2e678e8f3d73812e9",
    "part-00498-of-00500": "e6d68a7632e9f4aa1a94128cce556dc9",
    "part-00499-of-00500": "b3b087ad24e3770d879a351664cebc5a",
}
