"""The rows the master reads from its database, one module per concept: the types services
return and schemas turn into the wire's shapes. Below both (it imports neither), so neither
imports the other for a type (.importlinter, "rows").
"""
