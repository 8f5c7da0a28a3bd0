"""``python -m tests.models.standin_random``: serve the stand-in provider (what ``pulumi-resource-random`` runs)."""

from tests.models.standin_random.provider import serve

if __name__ == "__main__":
    serve()
