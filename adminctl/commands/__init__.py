"""One module per noun: stats, queue, task, enqueue, server, worker."""
