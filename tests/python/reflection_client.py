#!/usr/bin/env python3
"""A tli client written with grpcio and server reflection only (no generated code).

Usage: reflection_client.py HOST:PORT JOB_ID
Lists the services the server offers, then streams WatchTraining for JOB_ID until the
job finishes, printing one line per event kind seen and the final job state, then lists
the host's models (ModelService) and asks to load one that does not exist. Exit 0 when
the stream ended with a `finished` event whose tasks all completed.
"""
import sys

import grpc
from google.protobuf import descriptor_pool, json_format
from google.protobuf.message_factory import GetMessageClass
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)


def main() -> int:
    address, job_id = sys.argv[1], int(sys.argv[2])
    channel = grpc.insecure_channel(address)
    database = ProtoReflectionDescriptorDatabase(channel)
    services = sorted(database.get_services())
    print("services:", " ".join(services))
    pool = descriptor_pool.DescriptorPool(database)
    service = pool.FindServiceByName("tli.v1.TrainingService")
    method = service.methods_by_name["WatchTraining"]
    request_class = GetMessageClass(method.input_type)
    response_class = GetMessageClass(method.output_type)
    watch = channel.unary_stream(
        "/tli.v1.TrainingService/WatchTraining",
        request_serializer=request_class.SerializeToString,
        response_deserializer=response_class.FromString,
    )
    kinds = []
    finished = None
    for event in watch(request_class(job_id=job_id, interval_ms=100), timeout=120):
        kind = event.WhichOneof("event")
        if kind not in kinds:
            kinds.append(kind)
        if kind == "finished":
            finished = json_format.MessageToDict(event.finished, preserving_proto_field_name=True)
    print("events:", " ".join(kinds))
    if finished is None:
        print("stream ended without a finished event")
        return 1
    states = [t["state"] for t in finished["progress"]["tasks"]]
    print("final states:", " ".join(states))
    models = pool.FindServiceByName("tli.v1.ModelService")
    listed = unary(channel, models, "ListModels")(
        GetMessageClass(models.methods_by_name["ListModels"].input_type)(), timeout=30
    )
    print("models:", len(listed.models))
    load = models.methods_by_name["LoadModel"]
    try:
        unary(channel, models, "LoadModel")(GetMessageClass(load.input_type)(model="nope"), timeout=30)
        print("load nope: accepted")
    except grpc.RpcError as error:
        print("load nope:", error.code().name, error.details())
    return 0 if all(s == "TASK_STATE_COMPLETED" for s in states) else 1


def unary(channel, service, name):
    """A unary call of `service.name` with messages built from its reflected descriptors."""
    method = service.methods_by_name[name]
    return channel.unary_unary(
        f"/{service.full_name}/{name}",
        request_serializer=GetMessageClass(method.input_type).SerializeToString,
        response_deserializer=GetMessageClass(method.output_type).FromString,
    )


if __name__ == "__main__":
    sys.exit(main())
