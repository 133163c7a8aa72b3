"""The pure domain core: specs, compute, collectives, memory, schedule.

Standard library plus PyYAML only; no pluggy, grpc, protobuf, ray or opentelemetry
(enforced by import-linter in .ci/run).
"""
