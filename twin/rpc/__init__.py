"""Generated gRPC/protobuf modules (from proto/, by scripts/gen_protos.py; not in git)."""
