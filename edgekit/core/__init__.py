"""The plumbing every stage stands on: errors, safe files and limits, the cache, targets, artifacts' manifests."""
