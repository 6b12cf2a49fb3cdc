"""What the slow tests drive: throwaway servers and clusters, a fault proxy and injectors, replica processes and
the soak."""
