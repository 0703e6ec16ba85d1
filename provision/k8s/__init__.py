"""The serving plan rendered as Kubernetes objects, diffed and server-side applied."""
