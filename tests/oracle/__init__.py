"""The rules as plain Python, one event or one object at a time: what the production rules (the
batch classifier, the column rules) are held equal to by the property tests, and what
`publisher bench`'s one-event-at-a-time reference runs. Nothing in a cycle imports them."""
