"""Reading sources and writing storage through fsspec (local paths today, s3:// via s3fs)."""
