"""The main resource of the SparkApplication (k8s/operator/): spark-submit's PythonRunner runs
this file with the application's driverArgs, e.g. ``run --config
/etc/l2m/topology/kubernetes.yaml``; it is ``l2m`` itself. Under spark-submit the driver's main
process is the JVM, which does not forward SIGTERM to Python: see docs/kubernetes.md ("The
Apache Spark operator") for what that changes. Outside Spark: ``python l2m-main.py --help``."""

import sys

from l2m.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
