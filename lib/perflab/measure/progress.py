"""Progress bars that leave their finished state in an executed notebook.

``tqdm.auto`` draws a widget in a notebook; the plain-text copy stored with it is taken when
the bar is first shown ("0/6"), so a notebook executed by papermill keeps that first frame.
``progress`` is the same bar, shown under a display id and shown again when it closes, so the
stored text is the last state ("6/6 [00:12<00:00, ...]"). Outside a notebook it is
``tqdm.auto``'s bar unchanged.
"""

from __future__ import annotations

from tqdm.auto import tqdm
from tqdm.notebook import tqdm_notebook

#: Whether ``tqdm.auto`` chose the notebook bar (an IPython kernel with ipywidgets).
IN_NOTEBOOK = issubclass(tqdm, tqdm_notebook)


class progress(tqdm):  # noqa: N801 (used like tqdm)
    """``tqdm.auto.tqdm`` whose notebook widget is updated, text included, when it closes."""

    def __init__(self, *args, **kwargs) -> None:
        self._handle = None
        # A bar shown after a delay, or removed when done, is left to tqdm.
        tracked = IN_NOTEBOOK and kwargs.get("leave", True) and kwargs.get("delay", 0) <= 0
        if tracked:
            kwargs["display"] = False  # shown below, under a display id
        super().__init__(*args, **kwargs)
        if tracked and not self.disable:
            from IPython.display import display

            self._handle = display(self.container, display_id=True)
            self.displayed = True

    def close(self) -> None:
        super().close()
        if self._handle is not None:
            self._handle.update(self.container)  # the finished text replaces the first frame
            self._handle = None
