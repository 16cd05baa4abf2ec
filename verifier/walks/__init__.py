"""The walks ``bernstein.verifier.verify`` runs over a partition's records, steps 1-3 of its report.

``chain``: one run's journal (hash chain, seals, producer signatures); ``partition``: the partition's audit
chain, read and checked once however many runs are joined with it; ``audit``: one run's audit crossings
joined with its journal. ``native/src/walk.rs`` advances the plain records of these walks in Rust and
reads their attributes by name.
"""
