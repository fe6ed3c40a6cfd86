"""What the driver-loop tests share: a rollout fleet that answers from a script."""

from __future__ import annotations

from common.types import Completion


class FakeRollout:
    def generate_stream(self, requests):
        # Groups arrive in the order engines finish them, several per arrival: the last
        # request alone first, then the others together, reversed.
        groups = [
            [
                Completion(r.request_id, g, [1], [2] * (g + 1), [0.0] * (g + 1), " 7", "stop", 0)
                for g in range(len(r.seeds))
            ]
            for r in reversed(requests)
        ]
        yield groups[:1]
        yield groups[1:]
