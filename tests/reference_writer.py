"""The reference's writer, stated plainly: each instance's ids padded to fixed width as Python
int lists, then one serialized record per instance.

The reference (create_pretraining_data.py) looks up the ids of each instance's token strings,
pads input_ids, input_mask and segment_ids to max_seq_length and masked_lm_positions,
masked_lm_ids and masked_lm_weights to max_predictions_per_seq, wraps each list in a
tf.train.Feature, and writes the tf.train.Example of every instance to a TFRecord file.
Without TensorFlow, `ExampleCodec` builds messages of the same schema (tf.train.Example's
field numbers and types) with `protobuf`, and `write_records` frames each record as TFRecord
does (length, checksum of the length, data, checksum of the data; zlib's CRC-32 stands in
for TensorFlow's CRC-32C). The serialized bytes are a stand-in for the reference's cost, not
a file anything reads.
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import Iterable

from reference_instances import RefInstance

INT_FEATURES = (
    "input_ids",
    "input_mask",
    "segment_ids",
    "masked_lm_positions",
    "masked_lm_ids",
    "next_sentence_labels",
)


def padded_features(
    instance: RefInstance, vocab: dict[str, int], max_seq_length: int, max_predictions: int
) -> dict[str, list]:
    """The reference's feature lists of one instance."""
    input_ids = [vocab[token] for token in instance.tokens]
    real, pad = len(input_ids), max_seq_length - len(input_ids)
    masked = len(instance.masked_lm_positions)
    free = max_predictions - masked
    return {
        "input_ids": input_ids + [0] * pad,
        "input_mask": [1] * real + [0] * pad,
        "segment_ids": list(instance.segment_ids) + [0] * pad,
        "masked_lm_positions": list(instance.masked_lm_positions) + [0] * free,
        "masked_lm_ids": [vocab[token] for token in instance.masked_lm_labels] + [0] * free,
        "masked_lm_weights": [1.0] * masked + [0.0] * free,
        "next_sentence_labels": [1 if instance.is_random_next else 0],
    }


class ExampleCodec:
    """Messages with tf.train.Example's schema: Example{features=1: Features}, Features{feature
    =1: map<string, Feature>}, Feature{oneof: bytes_list=1, float_list=2, int64_list=3},
    Int64List{value=1: packed int64}, FloatList{value=1: packed float}."""

    def __init__(self):
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

        proto = descriptor_pb2.FileDescriptorProto(
            name="reference_example.proto", package="reference", syntax="proto3"
        )
        f = descriptor_pb2.FieldDescriptorProto
        for name, field_type in (
            ("Int64List", f.TYPE_INT64),
            ("FloatList", f.TYPE_FLOAT),
            ("BytesList", f.TYPE_BYTES),
        ):
            message = proto.message_type.add(name=name)
            message.field.add(name="value", number=1, type=field_type, label=f.LABEL_REPEATED)
        feature = proto.message_type.add(name="Feature")
        feature.oneof_decl.add(name="kind")
        for number, name in ((1, "BytesList"), (2, "FloatList"), (3, "Int64List")):
            field = feature.field.add(
                name=name[:-4].lower() + "_list",
                number=number,
                type=f.TYPE_MESSAGE,
                type_name=f".reference.{name}",
                label=f.LABEL_OPTIONAL,
            )
            field.oneof_index = 0
        features = proto.message_type.add(name="Features")
        entry = features.nested_type.add(name="FeatureEntry")
        entry.options.map_entry = True
        entry.field.add(name="key", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
        entry.field.add(
            name="value",
            number=2,
            type=f.TYPE_MESSAGE,
            type_name=".reference.Feature",
            label=f.LABEL_OPTIONAL,
        )
        features.field.add(
            name="feature",
            number=1,
            type=f.TYPE_MESSAGE,
            label=f.LABEL_REPEATED,
            type_name=".reference.Features.FeatureEntry",
        )
        example = proto.message_type.add(name="Example")
        example.field.add(
            name="features",
            number=1,
            type=f.TYPE_MESSAGE,
            type_name=".reference.Features",
            label=f.LABEL_OPTIONAL,
        )
        pool = descriptor_pool.DescriptorPool()
        pool.Add(proto)
        cls = {
            name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"reference.{name}"))
            for name in ("Int64List", "FloatList", "Feature", "Features", "Example")
        }
        self.int64_list, self.float_list = cls["Int64List"], cls["FloatList"]
        self.feature, self.features, self.example = cls["Feature"], cls["Features"], cls["Example"]

    def serialize(self, features: dict[str, list]) -> bytes:
        """One Example, each feature list wrapped as the reference wraps it."""
        wrapped = {
            name: self.feature(int64_list=self.int64_list(value=list(features[name])))
            for name in INT_FEATURES[:5]
        }
        wrapped["masked_lm_weights"] = self.feature(
            float_list=self.float_list(value=list(features["masked_lm_weights"]))
        )
        wrapped["next_sentence_labels"] = self.feature(
            int64_list=self.int64_list(value=list(features["next_sentence_labels"]))
        )
        example = self.example(features=self.features(feature=wrapped))
        return example.SerializeToString()

    def parse(self, data: bytes) -> dict[str, list]:
        """The feature lists of one serialized Example."""
        example = self.example.FromString(data)
        return {
            name: list(getattr(feature, feature.WhichOneof("kind")).value)
            for name, feature in example.features.feature.items()
        }


def write_records(path: str | os.PathLike, records: Iterable[bytes]) -> int:
    """TFRecord framing of each record; returns the count written."""
    count = 0
    with open(path, "wb") as out:
        for data in records:
            length = struct.pack("<Q", len(data))
            out.write(
                length
                + struct.pack("<I", zlib.crc32(length))
                + data
                + struct.pack("<I", zlib.crc32(data))
            )
            count += 1
    return count


def read_records(path: str | os.PathLike) -> Iterable[bytes]:
    """The records of a file `write_records` wrote, checksums checked."""
    with open(path, "rb") as source:
        while header := source.read(12):
            length = header[:8]
            if struct.unpack("<I", header[8:])[0] != zlib.crc32(length):
                raise ValueError(f"{path}: bad length checksum")
            data = source.read(struct.unpack("<Q", length)[0])
            if struct.unpack("<I", source.read(4))[0] != zlib.crc32(data):
                raise ValueError(f"{path}: bad record checksum")
            yield data


def write_instances(
    path: str | os.PathLike,
    instances: Iterable[RefInstance],
    vocab: dict[str, int],
    max_seq_length: int,
    max_predictions: int,
) -> int:
    """The reference's write loop: per instance, padded lists, then one Example record."""
    codec = ExampleCodec()
    return write_records(
        path,
        (
            codec.serialize(padded_features(instance, vocab, max_seq_length, max_predictions))
            for instance in instances
        ),
    )
