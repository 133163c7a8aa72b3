"""twin.rpc.v1: generated from proto/twin/rpc/v1/*.proto (python scripts/gen_protos.py)."""
