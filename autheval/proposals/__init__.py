"""Proposals (stage `proposals`): a proposals file, ranked slates, and the CCT aggregators."""
