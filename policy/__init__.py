"""The tailnet ACL policy (base policy in Git, deterministic render) and the program's guard rails.

Imports nothing from ``components``; the policy renderer and the CrossGuard pack live here.
"""
