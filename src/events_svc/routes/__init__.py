"""HTTP routes: parse a DTO, resolve the actor, call ONE verb, shape the answer."""
