"""Recurring evaluation (stage `recurring`): the acceptance protocol, landed logs, the monitor, notifications and
the deployment simulator."""
