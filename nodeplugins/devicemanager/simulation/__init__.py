"""Simulated hardware: node profile files, and the NVML library object that serves one."""
