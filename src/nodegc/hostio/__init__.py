"""Host I/O helpers shared by the readers (inventory), the executors (reclaim) and the sandbox.

One module per concern: bounded file reads (files), the mount table (mountinfo), the kubelet's and the
CNI plugins' on-disk layouts (kubelet, cni_files), libc calls (libc), rtnetlink (netlink), iptables-save
(iptables) and the wall clock (clock). They sit below inventory and reclaim and import only the model.
"""
