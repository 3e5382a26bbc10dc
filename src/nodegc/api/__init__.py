"""The API plumbing under the desired-state sources and the cluster writers.

One kubeconfig loader and client factory (`client`), one error translator (`errors`), one parser of API
objects (`objects`), the one paged list and live GET (`reads`), the proof that a list is current
(`currency`, the node Lease), and the one adapter over lightkube internals (`streaming`, raw watch
requests).
Nothing above this layer builds a client, catches an httpx or lightkube exception, or parses a Pod or an
EndpointSlice on its own.
"""
