"""The notebooks' figures, one module per topic: each function takes the table a library
function returned and returns a matplotlib Figure (saved by ``NotebookRun.figure``)."""
