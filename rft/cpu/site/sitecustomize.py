"""The CPU profile's start-up hook: run by every Python process with rft/cpu/site on PYTHONPATH.

With RFT_CPU_STANDINS=1 (set by train_grpo_cpu.sh) it installs rft.cpu.standins as soon as torch (and
DeepSpeed's ZeRO-3 module) are imported, in the driver and, through the inherited environment, in every Ray worker
and vLLM engine process.
Without that variable it does nothing.
"""

import os

if os.environ.get("RFT_CPU_STANDINS") == "1":
    from rft.cpu.standins import install_on_import

    install_on_import()
