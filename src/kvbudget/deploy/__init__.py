"""Operations: Kubernetes manifests and Prometheus alert rules from a plan or an accepted report.

Renders only; never runs a load (canary and the rollback drill live in ``kvbudget.accept``).
"""
