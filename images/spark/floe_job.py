"""The Spark job's entry file, /opt/floe/floe_job.py in the image.

SparkApplications name it as ``mainApplicationFile: local:///opt/floe/floe_job.py`` because
spark-submit runs a Python file, not a module; with the arguments the operator renders
(``run --config /etc/floe/job/job.json``) it behaves exactly as ``python -m floe_sparkapp``,
exit codes included (2: invalid config, 3: data loss, 4: maintenance failed, 5: the table
has another writer), which is what fails the driver or the maintenance Job.
"""

import sys

from floe_sparkapp.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
