"""The API plumbing under the desired-state sources and the cluster writers.

One kubeconfig loader and client factory (`client`), one error translator (`errors`), one parser of API
objects (`objects`), and the one adapter over lightkube internals (`streaming`, raw watch requests).
Nothing above this layer builds a client, catches an httpx or lightkube exception, or parses a Pod or an
EndpointSlice on its own.
"""
