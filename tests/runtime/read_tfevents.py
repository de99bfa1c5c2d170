#!/usr/bin/env python3
"""Reads a TensorBoard event file with Python's protobuf runtime (Debian's
python3-protobuf), as a second reader independent of Tessera's writer: the
Event/Summary messages are described here from the public format (TensorFlow's
event.proto and summary.proto field numbers), and every record's masked
CRC-32C is recomputed bit by bit.

usage: read_tfevents.py EVENT_FILE
Prints {"file_version": ..., "records": N, "scalars": [[tag, step, value], ...]}
as JSON; exits 1 with a message naming the record on any CRC or parse error.
"""
import json
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto


def event_class():
    fdp = descriptor_pb2.FileDescriptorProto(name="tfevents_check.proto", package="tfcheck",
                                             syntax="proto3")

    def field(msg, name, number, ftype, label=F.LABEL_OPTIONAL, type_name=None, oneof=None):
        f = msg.field.add(name=name, number=number, type=ftype, label=label)
        if type_name:
            f.type_name = type_name
        if oneof is not None:
            f.oneof_index = oneof

    summary = fdp.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    field(value, "tag", 1, F.TYPE_STRING)
    field(value, "simple_value", 2, F.TYPE_FLOAT)
    field(summary, "value", 1, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".tfcheck.Summary.Value")
    event = fdp.message_type.add(name="Event")
    event.oneof_decl.add(name="what")  # as in event.proto: one of these per event
    field(event, "wall_time", 1, F.TYPE_DOUBLE)
    field(event, "step", 2, F.TYPE_INT64)
    field(event, "file_version", 3, F.TYPE_STRING, oneof=0)
    field(event, "summary", 5, F.TYPE_MESSAGE, type_name=".tfcheck.Summary", oneof=0)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    desc = pool.FindMessageTypeByName("tfcheck.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def main():
    Event = event_class()
    data = open(sys.argv[1], "rb").read()
    out = {"file_version": None, "records": 0, "scalars": []}
    at = 0
    while at < len(data):
        where = f"{sys.argv[1]} record {out['records']}"
        if len(data) - at < 12:
            sys.exit(f"{where}: truncated header")
        (length,) = struct.unpack_from("<Q", data, at)
        (length_crc,) = struct.unpack_from("<I", data, at + 8)
        if length_crc != masked(data[at:at + 8]):
            sys.exit(f"{where}: length CRC mismatch")
        payload = data[at + 12:at + 12 + length]
        if len(payload) != length or len(data) < at + 16 + length:
            sys.exit(f"{where}: truncated payload")
        (payload_crc,) = struct.unpack_from("<I", data, at + 12 + length)
        if payload_crc != masked(payload):
            sys.exit(f"{where}: payload CRC mismatch")
        event = Event()
        event.ParseFromString(payload)
        if event.HasField("file_version"):
            out["file_version"] = event.file_version
        for v in event.summary.value:
            out["scalars"].append([v.tag, event.step, v.simple_value])
        out["records"] += 1
        at += 16 + length
    print(json.dumps(out))


if __name__ == "__main__":
    main()
