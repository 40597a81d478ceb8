"""The kernel client ``perflab run`` executes notebooks with: Jupyter's own, but one that waits for
a cell's reply in one-second looks rather than in one wait with no end.

Why: nbclient (0.11) waits for a cell's ``execute_reply`` with ``shell_channel.get_msg(timeout=
None)``, one ``poll`` of the shell socket with no timeout. A cell that shows an ipywidgets
``Output`` (the calculators of notebooks 07 and 08) makes nbclient send the widget's state on that
same socket while the wait is pending. nbclient issue 312 reports such a wait that never ends
although the kernel has replied; a run hung so here once, idle kernel and all, in notebook 08's
calculator cell during a full test run on two workers (not reproduced on demand since). A wait
with a timeout polls the socket afresh each time: it cannot wait past a reply it missed for longer
than one look.
"""

from __future__ import annotations

from queue import Empty
from typing import Any

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.manager import AsyncKernelManager
from traitlets import DottedObjectName, Type

#: Seconds one look at the shell socket lasts before the next.
LOOK_S = 1.0


class LookingShellChannel(AsyncZMQSocketChannel):
    """The shell channel, whose endless wait is a loop of ``LOOK_S`` waits; a wait with a
    timeout is left as asked."""

    async def get_msg(self, timeout: float | None = None) -> dict[str, Any]:
        if timeout is not None:
            return await super().get_msg(timeout)
        while True:
            try:
                return await super().get_msg(LOOK_S)
            except Empty:
                continue


class LookingKernelClient(AsyncKernelClient):
    shell_channel_class = Type(LookingShellChannel)


class LookingKernelManager(AsyncKernelManager):
    """What ``papermill.execute_notebook(..., kernel_manager_class=LookingKernelManager)`` starts
    kernels with: Jupyter's manager, handing out ``LookingKernelClient``s."""

    client_class = DottedObjectName("perflab.tools.kernel_client.LookingKernelClient")
    client_factory = Type(LookingKernelClient)
