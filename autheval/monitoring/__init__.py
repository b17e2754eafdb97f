"""Recurring evaluation (stage `recurring`): the acceptance protocol, landed logs, the monitor, notifications,
the acknowledgements of alerts and the deployment simulator."""
