"""The ImageNet preparation of AlexNet (Krizhevsky, Sutskever & Hinton 2012, Sec. 2 and 4.1).

Per image, on the host (NumPy, float32, RGB in 0..255, CHW):

1. decode with Pillow; grey, palette, CMYK and alpha images become RGB;
2. rescale so that the shorter side is ``resize`` (256), then keep the central
   ``resize`` x ``resize`` patch (the paper's fixed 256x256 resolution);
3. training: a random ``crop`` x ``crop`` window (224, or 227 for the
   ``original`` network whose first layer needs it), uniform over every
   position, mirrored left-right with probability 1/2; testing: the centre
   window, or the paper's ten crops (four corners and centre, and their
   mirror images) whose softmax outputs are averaged;
4. subtract the per-channel mean of the training set;
5. training only, the colour ("PCA") augmentation: to every pixel add
   ``[p1 p2 p3] [a1 s1, a2 s2, a3 s3]^T``, where ``p_i`` are the eigenvectors
   of the 3x3 covariance of the training set's RGB pixel values, ``s_i`` the
   square roots of its eigenvalues ``l_i``, and ``a_i ~ N(0, 0.1)`` is drawn
   once per image and use. The paper writes ``l_i``; on 0..255 values
   (``l_1`` ~ 3000 for ImageNet) that would move pixels by hundreds, and the
   constants of the released implementations (55.46, 4.794, 1.148 for
   ImageNet on 0..255) are the standard deviations ``s_i``: we use those.
"""

import numpy as np

RESIZE = 256
CROP = {"original": 227, "torchvision": 224}
PCA_STD = 0.1  # the standard deviation of the colour noise's alpha


class ImageDecodeError(OSError):
    """An image file that Pillow cannot read; names the file and the reason."""

    def __init__(self, path, reason):
        super().__init__(f"{path}: cannot decode the image ({reason})")
        self.path, self.reason = path, reason

    def __reduce__(self):  # picklable, so that rank 0 can send it to the other ranks
        return type(self), (self.path, self.reason)


def pillow():
    """The ``PIL.Image`` module, or an ImportError that names the extra to install."""
    try:
        from PIL import Image
    except ImportError as exc:
        raise ImportError(
            "image folders need Pillow: pip install 'minidl[images]' (or pip install pillow)"
        ) from exc
    return Image


def load_patch(path, resize=RESIZE):
    """The image at ``path`` as uint8 HWC RGB: shorter side rescaled to ``resize`` (bilinear,
    antialiased), then its central ``resize`` x ``resize`` patch (paper, Sec. 2)."""
    Image = pillow()
    try:
        with Image.open(path) as image:
            image.draft("RGB", (resize, resize))  # JPEG: decode at the smallest scale >= resize
            image = image.convert("RGB")
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise ImageDecodeError(path, f"{type(exc).__name__}: {exc}") from None
    width, height = image.size
    scale = resize / min(width, height)
    size = (max(resize, round(width * scale)), max(resize, round(height * scale)))
    image = image.resize(size, Image.Resampling.BILINEAR, reducing_gap=None)
    left, top = (size[0] - resize) // 2, (size[1] - resize) // 2
    return np.asarray(image.crop((left, top, left + resize, top + resize)))


def crop_window(patch, top, left, size):
    """The ``size`` x ``size`` window of an HWC patch at (top, left), as float32 CHW."""
    return np.ascontiguousarray(
        patch[top : top + size, left : left + size].transpose(2, 0, 1), dtype=np.float32
    )


def ten_crop_corners(side, size):
    """(top, left) of the four corner windows and the centre window (paper, Sec. 4.1)."""
    far, mid = side - size, (side - size) // 2
    return ((0, 0), (0, far), (far, 0), (far, far), (mid, mid))


def pca_noise(eigenvalues, eigenvectors, alpha):
    """The RGB offset ``P (alpha * sqrt(lambda))`` added to every pixel (step 5 of the module
    doc); the eigenvectors are the columns of ``P``."""
    return eigenvectors @ (alpha * np.sqrt(eigenvalues))


class Preparation:
    """What ``ImageFolder`` does to each image: the paper's steps 2-5 (module doc).

    ``train`` chooses random crops, flips and colour noise (True) or the centre
    crop (False; ``ten_crop`` for the ten-crop test). ``mean``: the per-channel
    mean to subtract; ``eigenvalues``/``eigenvectors``: the training set's
    colour PCA (``colour.ColourStats``), needed for ``pca_std > 0``.
    """

    def __init__(
        self,
        train,
        crop=CROP["torchvision"],
        resize=RESIZE,
        mean=None,
        eigenvalues=None,
        eigenvectors=None,
        pca_std=PCA_STD,
        ten_crop=False,
    ):
        if not 0 < crop <= resize:
            raise ValueError(f"crop {crop} must be between 1 and resize {resize}")
        self.train, self.crop, self.resize, self.ten_crop = train, int(crop), int(resize), ten_crop
        self.mean = np.zeros(3, np.float32) if mean is None else np.asarray(mean, np.float32)
        self.pca_std = pca_std if train else 0.0
        if self.pca_std and eigenvalues is None:
            raise ValueError("colour augmentation needs the training set's colour PCA")
        self.eigenvalues, self.eigenvectors = eigenvalues, eigenvectors

    @property
    def shape(self):
        """The shape of one prepared sample: (3, crop, crop), or (10, 3, crop, crop)."""
        one = (3, self.crop, self.crop)
        return (10, *one) if self.ten_crop and not self.train else one

    def __call__(self, patch, rng=None):
        """Prepare a uint8 HWC patch from ``load_patch``; ``rng`` draws the training choices."""
        side, size = patch.shape[0], self.crop
        if not self.train:
            if self.ten_crop:
                crops = [crop_window(patch, t, s, size) for t, s in ten_crop_corners(side, size)]
                crops += [c[:, :, ::-1] for c in crops]
                return np.stack(crops) - self.mean[:, None, None]
            mid = (side - size) // 2
            return crop_window(patch, mid, mid, size) - self.mean[:, None, None]
        top, left = rng.integers(0, side - size + 1, size=2)
        image = crop_window(patch, top, left, size)
        if rng.random() < 0.5:
            image = np.ascontiguousarray(image[:, :, ::-1])
        offset = -self.mean
        if self.pca_std:
            alpha = rng.normal(0.0, self.pca_std, size=3)
            offset = offset + pca_noise(self.eigenvalues, self.eigenvectors, alpha)
        image += offset.astype(np.float32)[:, None, None]
        return image
