"""leakdemo: watch federated learning leak private training data, live.

The engine (this package, minus `dashboard/`) is plain torch + numpy + scikit-image:
Scenario -> Protocol (Observation, Knowledge) -> Defense -> Attack -> Runner events.
"""
__version__ = "0.1.0"
