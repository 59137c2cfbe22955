"""Where a rank's samples come from: the HDF5 shards and the streams over them.

`SOURCES` maps a balancing strategy's `source` (data/order/strategies.py) to the stream that
draws each rank's raw local batch; the bucketed stream of the curricula is bucket_queues.py.
"""

from data.sources.shard_stream import ShardStream
from data.sources.stratified import StratifiedStream

SOURCES = {"shards": ShardStream, "stratified": StratifiedStream}
