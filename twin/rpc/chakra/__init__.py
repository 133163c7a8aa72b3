"""MLCommons Chakra execution-trace messages, generated from proto/twin/rpc/chakra at build time."""
