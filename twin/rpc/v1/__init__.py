"""Version 1 of the twin's wire protocol (generated modules; see ``twin.rpc``)."""
