"""The logdir: where records live and how they are read back.

- ``fs``: local paths and object stores behind one small interface (the only module that
  handles paths and schemes).
- ``eventfile``: the file a writer writes, local or on an object store, behind one interface.
- ``objects``: an event file on an object store, as deltas sealed into segments.
- ``tfrecord``: TFRecord framing with its CRC, and torn-tail-tolerant reading.
- ``readers``: runs, events, scalars and timeline records of a logdir (``read_scalars``,
  ``read_events``).
"""
