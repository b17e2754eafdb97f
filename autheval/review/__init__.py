"""The local review (stage `review`): the declared rules, the simulated review in SQL, gate scores given by a source."""
