"""The golden vectors' generators: they write schemas/vectors/*.json from the reference code (not shipped)."""
