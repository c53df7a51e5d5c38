"""Unit tests of test_kafka_producer.py."""
