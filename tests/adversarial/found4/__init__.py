"""Findings of a review of the desired-state and API layers: snapshots that claimed more than they show or
a later time than they were taken, a terminate re-read that went back in time, watch freshness, reflector
threads. Each kept as a test."""
