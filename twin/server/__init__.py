"""The gRPC service (``twin serve``): thin servicers over :class:`twin.engine.Engine`."""
