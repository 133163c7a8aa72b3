"""An example third-party Fabric Twin plugin (installed in the test run)."""
