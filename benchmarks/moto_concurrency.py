"""Does moto's server answer GETs in parallel? 1,000 small GETs with 1, 4 and 16 threads:
``python -m benchmarks.moto_concurrency``. It bounds what parallel requests gain in the S3 benchmarks (moto is
the S3 endpoint the tests and benchmarks start on 127.0.0.1)."""
import os, socket, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor
import boto3
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
p = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close(); break
        except OSError: time.sleep(0.1)
    c = boto3.client("s3", endpoint_url=url, aws_access_key_id="a", aws_secret_access_key="b", region_name="us-east-1",
                     config=__import__("botocore.config").config.Config(max_pool_connections=32))
    c.create_bucket(Bucket="bench-bucket")
    for i in range(1000): c.put_object(Bucket="bench-bucket", Key=f"k{i}", Body=b"x" * 400)
    for threads in (1, 4, 16, 1, 16):
        t0 = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda i: c.get_object(Bucket="bench-bucket", Key=f"k{i}")["Body"].read(), range(1000)))
        dt = time.perf_counter() - t0
        print(f"threads {threads:2}: 1,000 GETs in {dt:.2f} s ({dt:.4f} s per 1,000 -> {dt:.2f} ms each)")
finally:
    p.terminate()
