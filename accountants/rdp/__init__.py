"""The Rényi-DP accountant: dp-accounting's RDP, RDP of the Gaussian under sampling without replacement, and the RDP ->
(epsilon, delta) conversions."""
