"""State in Redis: connections, the embedded server, key builders and the route transcript."""
