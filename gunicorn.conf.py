"""gunicorn settings for the webhook: many light threads, nothing slow ever runs in a request."""

import os

_sandbox = not os.environ.get("FEISHU_APP_ID")
# Sandbox credentials are public fakes, so a sandbox service only listens on loopback.
bind = f"{'127.0.0.1' if _sandbox else '0.0.0.0'}:{os.environ.get('PORT', '8000')}"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = "gthread"
threads = int(os.environ.get("WEB_THREADS", "8"))
timeout = 30
graceful_timeout = 20
keepalive = 5
max_requests = 5000
max_requests_jitter = 500
control_socket_disable = True
accesslog = None
errorlog = "-"
