"""The course's code exercises: one module each, with its checker, its solution and known wrong answers.

See :mod:`nvtutorial.teach.check` for what a module declares. These modules run on the ranks
too, so they import only PyTorch and the rank-side parts of the package.
"""
