"""Fabric Twin: a digital twin of AI training cluster interconnects.

Library use::

    from twin.engine import Engine
    est = Engine().evaluate("examples/gpt3-175b-dgx-h100-ib.yaml")
    print(est.step_time_s, est.mfu)
"""

__version__ = "0.1.0"
