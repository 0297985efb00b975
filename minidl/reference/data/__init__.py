"""AlexNet's data preparation, the textbook way: the colour PCA, its noise, top-k error.

colour.py    the RGB covariance's eigenvectors and the per-image colour noise
             (Krizhevsky et al. 2012, Sec. 4.1); the top-k error of Sec. 6
"""

from .colour import colour_pca, pca_lighting, top_k_error

__all__ = ["colour_pca", "pca_lighting", "top_k_error"]
